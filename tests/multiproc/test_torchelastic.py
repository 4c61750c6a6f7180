"""The process group under torchrun's agent store (distbench/torchelastic.py): a new key namespace each round."""

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from distbench.torchelastic import round_token, under_agent_store

TIMEOUT = timedelta(seconds=20)


@pytest.fixture
def server():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    yield store


def _client(server) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT)


def _round(server, world_size: int, late: dict[int, float] | None = None, body=None) -> list:
    """One rendezvous round: a thread per rank, each with its own client (as each process has);
    rank r starts late[r] seconds after the others. Returns what each rank's body returned."""
    results, errors = [None] * world_size, []

    def rank_main(rank):
        try:
            time.sleep((late or {}).get(rank, 0.0))
            store = _client(server)
            token = round_token(store, rank, world_size, TIMEOUT)
            results[rank] = body(store, token, rank) if body else token
        except Exception as e:  # surfaced below, with the rank
            errors.append(f"rank {rank}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting"
    assert not errors, errors
    return results


def test_every_rank_gets_the_same_new_token_each_round_whatever_keys_earlier_rounds_left(server):
    seen = set()
    for late in ({}, {0: 0.5}, {2: 0.5}, {1: 0.3, 3: 0.6}):  # stale hello keys are there from round 2 on
        tokens = _round(server, 4, late)
        assert len(set(tokens)) == 1, tokens
        assert tokens[0] not in seen
        seen.add(tokens[0])


def test_the_handshake_cleans_up_its_answers(server):
    _round(server, 3)
    _round(server, 3, {1: 0.3})
    # what remains is one hello key per rank other than 0: answers and confirmations are deleted
    assert server.num_keys() == 2


def test_rank_zero_gives_up_with_a_clear_error_when_a_rank_never_comes(server):
    with pytest.raises(TimeoutError, match=r"rank\(s\) 1 did not join"):
        round_token(_client(server), 0, 2, timedelta(seconds=0.5))


def test_a_restarted_gloo_group_connects_although_the_dead_peer_left_its_address(server):
    """The failure torchrun restarts hit: rank 0 of the new round is up first and would read the address
    that rank 1 of the old round published (nothing listens there any more)."""

    def gloo_sum(store, token, rank):
        pg = dist.ProcessGroupGloo(dist.PrefixStore(f"pg/{token}", store), rank, 2, TIMEOUT)
        t = torch.tensor([rank + 1.0])
        pg.allreduce([t]).wait()
        return t.item()

    assert _round(server, 2, body=gloo_sum) == [3.0, 3.0]  # the old round; its groups are gone after it
    assert _round(server, 2, {1: 1.0}, body=gloo_sum) == [3.0, 3.0]


def test_under_agent_store_reads_torchruns_variables():
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert under_agent_store(env)
    assert not under_agent_store({**env, "TORCHELASTIC_USE_AGENT_STORE": "False"})
    assert not under_agent_store({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})  # plain env launch
