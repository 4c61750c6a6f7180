"""What the hand-written BERT baselines share: MR sentences tokenised once, per-batch padding, the model.

As in the usual fine-tuning scripts (Hugging Face's run_glue, the torch-ddp-examples BERT script): a
tokenizer, a DataLoader whose collate pads each batch to its longest sentence, the pretrained encoder with a
new classification head, plain Adam-family optimizer, no clipping, no schedule. Nothing here is distbench's
loop; the model and data files are the same, so that the loop is what is compared.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from distbench.data.mr import load_sentences, split
from distbench.models.bert import build_classifier, load_tokenizer


class Sentences(Dataset):
    def __init__(self, ids: list[list[int]], labels: list[int]):
        self.ids, self.labels = ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.ids[i], self.labels[i]


def train_set(data_dir: str | None, tokenizer) -> Sentences:
    from pathlib import Path

    sentences = load_sentences(Path(data_dir) if data_dir else None)
    ids = tokenizer(sentences.texts, truncation=True, max_length=128)["input_ids"]
    train_idx, _ = split(len(ids))
    return Sentences([ids[i] for i in train_idx], [sentences.labels[i] for i in train_idx])


def collate(pad_id: int):
    def pad(samples):
        longest = max(len(ids) for ids, _ in samples)
        input_ids = torch.full((len(samples), longest), pad_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, (ids, _) in enumerate(samples):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids)] = 1
        return input_ids, mask, torch.tensor([label for _, label in samples])

    return pad


def bert_loss(model, b) -> torch.Tensor:
    return F.cross_entropy(model(input_ids=b[0], attention_mask=b[1]).logits, b[2])


def model_and_data(data_dir: str | None):
    tokenizer = load_tokenizer(None)
    torch.manual_seed(0)
    return build_classifier(None, num_labels=2), train_set(data_dir, tokenizer), collate(tokenizer.pad_token_id or 0)
