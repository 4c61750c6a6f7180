"""The process group under torchrun: a fresh key namespace for every rendezvous round.

torchrun's rendezvous (torch >= 2.5) lends its workers the agent's own TCPStore
(TORCHELASTIC_USE_AGENT_STORE=True) and keeps that store for the whole job, restarts included
(pytorch/pytorch#135712, #167288). The process group writes its keys under the same names in every
round, so after a restart a rank can read the address that its dead peer published in the failed round:
gloo then retries "Connection refused" until the timeout, and the round fails again. Prefixing the keys
with TORCHELASTIC_RESTART_COUNT (what torch did before 2.5) is not enough: every agent counts its own
restarts, so the counts differ between machines.

`init_process_group` therefore agrees on a new namespace per round with a handshake that stale keys
cannot fool: every rank but 0 publishes a fresh random nonce; rank 0 answers each nonce it sees with
the round's token and waits until every rank has confirmed that token under the token's own keys.
An answer to a stale nonce is never read; a confirmation under a new token cannot be stale.
Used by the ddp and accelerate backends (Accelerate keeps a process group that already exists). A core module,
not launching's: the backends call it in their setup, and they stand below launching (docs/architecture.md).
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

import torch.distributed as dist

_NS = "distbench/round"
_POLL_S = 0.01


def under_agent_store(env: os._Environ | dict = os.environ) -> bool:
    """Whether torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT for the whole job."""
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in env and "MASTER_PORT" in env


def round_token(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> str:
    """A token that every rank of this round gets, new in every round, whatever keys earlier rounds left.

    `store` must be shared by all ranks; its own timeout bounds each blocking read."""
    if world_size == 1:
        return uuid.uuid4().hex
    if rank != 0:
        nonce = uuid.uuid4().hex
        store.set(f"{_NS}/hello/{rank}", nonce)
        token = store.get(f"{_NS}/welcome/{nonce}").decode()  # waits for rank 0's answer
        store.set(f"{_NS}/{token}/ready/{rank}", "1")
        return token
    token = uuid.uuid4().hex
    deadline = time.monotonic() + timeout.total_seconds()
    answered: dict[int, str] = {}  # rank -> the last nonce answered (perhaps a stale one)
    pending = set(range(1, world_size))
    while pending:
        for r in sorted(pending):
            if store.check([f"{_NS}/{token}/ready/{r}"]):
                pending.discard(r)
                store.delete_key(f"{_NS}/welcome/{answered[r]}")
                store.delete_key(f"{_NS}/{token}/ready/{r}")
            elif store.check([f"{_NS}/hello/{r}"]):
                nonce = store.get(f"{_NS}/hello/{r}").decode()
                if answered.get(r) != nonce:
                    if r in answered:  # that one was stale: its rank never read the answer
                        store.delete_key(f"{_NS}/welcome/{answered[r]}")
                    store.set(f"{_NS}/welcome/{nonce}", token)
                    answered[r] = nonce
        if pending:
            if time.monotonic() > deadline:
                missing = ", ".join(map(str, sorted(pending)))
                raise TimeoutError(f"rank(s) {missing} did not join the process group within {timeout}")
            time.sleep(_POLL_S)
    return token


def init_process_group(backend: str, timeout: timedelta) -> None:
    """dist.init_process_group from the launcher's environment; under torchrun's agent store, on a key
    namespace of this round's own (see the module docstring)."""
    if not under_agent_store():
        dist.init_process_group(backend=backend, timeout=timeout)
        return
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False, timeout=timeout
    )
    token = round_token(agent_store, rank, world_size, timeout)
    store = dist.PrefixStore(f"{_NS}/{token}/pg", agent_store)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
