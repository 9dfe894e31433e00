"""Batches, masks and batching by token count (§5.1), the copy task."""

import random

import pytest
import torch
from torch.utils.data import DataLoader

from annotated_transformer.attention import padding_mask, target_mask
from annotated_transformer.batching import (
    BOS,
    EOS,
    PAD,
    UNK,
    Batch,
    TokenBatchSampler,
    batch_by_sentences,
    batch_by_tokens,
    copy_task,
    make_batch,
    padding_stats,
)


def skewed_lengths(n: int = 3000, seed: int = 0) -> list[tuple[int, int]]:
    """Log-normal sentence lengths (long right tail), target length close to the source length."""
    rng = random.Random(seed)
    lengths = []
    for _ in range(n):
        src = max(1, min(200, round(rng.lognormvariate(3.0, 0.6))))
        tgt = max(1, round(src * rng.uniform(0.8, 1.25)))
        lengths.append((src, tgt))
    return lengths


# --- make_batch and Batch ---------------------------------------------------------------------


def test_special_token_ids():
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)


def test_make_batch_pads_and_shifts_the_target():
    batch = make_batch([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])])
    assert torch.equal(batch.src, torch.tensor([[5, 6, 7], [10, 0, 0]]))
    assert torch.equal(batch.tgt_in, torch.tensor([[BOS, 8, 9, 0], [BOS, 11, 12, 13]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[8, 9, EOS, 0], [11, 12, 13, EOS]]))
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    # the decoder input at position i is the output the model had to predict at position i - 1
    real = (batch.tgt_out[:, :-1] != PAD) & (batch.tgt_out[:, :-1] != EOS)
    assert torch.equal(batch.tgt_in[:, 1:][real], batch.tgt_out[:, :-1][real])


def test_make_batch_masks_and_counts():
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13])]
    batch = make_batch(pairs)
    assert batch.src_mask.shape == (2, 1, 3) and batch.src_mask.dtype == torch.bool
    assert batch.tgt_mask.shape == (2, 4, 4) and batch.tgt_mask.dtype == torch.bool
    assert torch.equal(batch.src_mask, padding_mask(batch.src, PAD))
    assert torch.equal(batch.tgt_mask, target_mask(batch.tgt_in, PAD))
    assert batch.src_mask[1, 0].tolist() == [True, False, False]
    # row 0 of the target: position 2 may see positions 0..2, never the padding at 3
    assert batch.tgt_mask[0, 2].tolist() == [True, True, True, False]
    assert torch.equal(batch.tgt_mask[1], torch.ones(4, 4, dtype=torch.bool).tril())  # no padding in row 1
    assert batch.n_tokens == 3 + 4  # target tokens + eos, padding excluded
    assert batch.n_src_tokens == 4
    assert len(batch) == 2


def test_make_batch_with_other_special_ids_and_empty_target():
    batch = make_batch([([7, 8], [])], pad=9, bos=5, eos=6)
    assert batch.tgt_in.tolist() == [[5]] and batch.tgt_out.tolist() == [[6]]
    assert batch.pad == 9 and batch.n_tokens == 1
    assert batch.src_mask.all()


def test_batch_to_moves_every_tensor():
    batch = make_batch([([5, 6], [7])]).to("cpu")
    assert isinstance(batch, Batch)
    assert all(t.device.type == "cpu" for t in (batch.src, batch.tgt_in, batch.tgt_out))
    meta = make_batch([([5, 6], [7])]).to("meta")
    assert meta.src.device.type == "meta" and meta.tgt_mask.device.type == "meta"


def test_make_batch_errors():
    with pytest.raises(ValueError, match="empty batch"):
        make_batch([])
    with pytest.raises(ValueError, match="empty sequence: the source of pair 1"):
        make_batch([([4], [5]), ([], [5])])
    with pytest.raises(ValueError, match="the target of pair 0 contains the padding id 0"):
        make_batch([([4], [5, 0])])


# --- batch_by_tokens --------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 50, 400, 3000])
@pytest.mark.parametrize("shuffle", [True, False])
def test_batch_by_tokens_covers_every_index_once_and_respects_max_tokens(max_tokens, shuffle):
    lengths = skewed_lengths(1000)
    batches = batch_by_tokens(lengths, max_tokens, shuffle=shuffle, seed=3)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    for batch in batches:
        assert batch
        padded_src = len(batch) * max(lengths[i][0] for i in batch)
        padded_tgt = len(batch) * max(lengths[i][1] + 1 for i in batch)
        if len(batch) > 1:  # a single pair longer than max_tokens gets a batch of its own
            assert padded_src <= max_tokens and padded_tgt <= max_tokens


def test_a_pair_longer_than_max_tokens_gets_its_own_batch():
    lengths = [(3, 3), (50, 2), (3, 4), (2, 2)]
    batches = batch_by_tokens(lengths, max_tokens=20, shuffle=False)
    assert [1] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]


def test_batch_by_tokens_groups_similar_lengths():
    lengths = [(10, 10), (2, 2), (10, 11), (2, 3), (2, 2), (10, 10)]
    batches = batch_by_tokens(lengths, max_tokens=40, shuffle=False)
    assert batches == [[1, 4, 3], [0, 5, 2]]


def test_batch_by_tokens_is_deterministic_and_changes_with_the_epoch():
    lengths = skewed_lengths(500)
    first = batch_by_tokens(lengths, 600, seed=1, epoch=0)
    assert first == batch_by_tokens(lengths, 600, seed=1, epoch=0)
    assert first != batch_by_tokens(lengths, 600, seed=1, epoch=1)
    assert first != batch_by_tokens(lengths, 600, seed=2, epoch=0)
    unshuffled = batch_by_tokens(lengths, 600, shuffle=False)
    assert unshuffled == batch_by_tokens(lengths, 600, shuffle=False, seed=5, epoch=7)
    # shuffling changes the order of the batches, not how many there are
    assert len(first) == len(unshuffled)


def test_batch_by_tokens_errors_and_empty_input():
    with pytest.raises(ValueError, match="max_tokens must be at least 1, got 0"):
        batch_by_tokens([(3, 3)], 0)
    with pytest.raises(ValueError, match=r"lengths\[1\] = \(0, 3\).*empty sequence"):
        batch_by_tokens([(3, 3), (0, 3)], 100)
    assert batch_by_tokens([], 100) == []


# --- batch_by_sentences and padding -----------------------------------------------------------


def test_batch_by_sentences():
    batches = batch_by_sentences(10, 4, shuffle=False)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    shuffled = batch_by_sentences(10, 4, seed=0)
    assert sorted(i for b in shuffled for i in b) == list(range(10))
    assert shuffled == batch_by_sentences(10, 4, seed=0)
    assert shuffled != batch_by_sentences(10, 4, seed=0, epoch=1)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        batch_by_sentences(10, 0)


def test_padding_stats_counts_source_and_target_with_its_special_token():
    lengths = [(3, 1), (1, 2)]
    stats = padding_stats([[0, 1]], lengths)
    # source: 2 rows x 3 = 6 slots, 4 real; target (+1): 2 rows x 3 = 6 slots, 2 + 3 = 5 real
    assert stats == {"real": 9, "padded": 12, "efficiency": 9 / 12, "n_batches": 1}
    assert padding_stats([[0], [1]], lengths)["efficiency"] == 1.0


def test_token_batching_wastes_less_padding_than_sentence_batching():
    lengths = skewed_lengths(3000)
    by_tokens = padding_stats(batch_by_tokens(lengths, 1000), lengths)
    mean_padded = by_tokens["padded"] / by_tokens["n_batches"]
    # sentence batches of a comparable size (the same number of batches)
    batch_size = len(lengths) // by_tokens["n_batches"]
    by_sentences = padding_stats(batch_by_sentences(len(lengths), batch_size), lengths)
    assert by_tokens["real"] == by_sentences["real"]
    assert by_tokens["efficiency"] > 0.9
    assert by_sentences["efficiency"] < 0.7
    assert by_tokens["efficiency"] > by_sentences["efficiency"] + 0.25
    assert mean_padded <= 2 * 1000


# --- TokenBatchSampler ------------------------------------------------------------------------


def test_token_batch_sampler_with_a_data_loader():
    pairs = copy_task(200, min_len=2, max_len=30, seed=4)
    lengths = [(len(s), len(t)) for s, t in pairs]
    sampler = TokenBatchSampler(lengths, max_tokens=128, seed=4)
    loader = DataLoader(pairs, batch_sampler=sampler, collate_fn=make_batch)
    batches = list(loader)
    assert len(batches) == len(sampler)
    assert sum(len(b) for b in batches) == len(pairs)
    for batch in batches:
        assert isinstance(batch, Batch)
        assert batch.src.numel() <= 128 and batch.tgt_in.numel() <= 128
    first = [b.src for b in batches]
    sampler.set_epoch(1)
    second = [b.src for b in loader]
    assert len(second) == len(sampler)
    assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(first, second, strict=True))
    sampler.set_epoch(0)
    assert all(torch.equal(a, b.src) for a, b in zip(first, loader, strict=True))


def test_token_batch_sampler_errors():
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        TokenBatchSampler([(3, 3)], max_tokens=-5)


# --- copy task --------------------------------------------------------------------------------


def test_copy_task():
    pairs = copy_task(300, vocab_size=11, min_len=3, max_len=6, seed=7)
    assert len(pairs) == 300
    assert pairs == copy_task(300, vocab_size=11, min_len=3, max_len=6, seed=7)
    assert pairs != copy_task(300, vocab_size=11, min_len=3, max_len=6, seed=8)
    ids = {i for src, _ in pairs for i in src}
    assert ids == set(range(UNK + 1, 11))  # every non-special id occurs, and no special one
    assert {len(src) for src, _ in pairs} == {3, 4, 5, 6}
    assert all(src == tgt and src is not tgt for src, tgt in pairs)


def test_copy_task_errors():
    with pytest.raises(ValueError, match="vocab_size must be larger than 4"):
        copy_task(5, vocab_size=4)
    with pytest.raises(ValueError, match="need 1 <= min_len <= max_len"):
        copy_task(5, min_len=5, max_len=4)
    with pytest.raises(ValueError, match="need 1 <= min_len <= max_len"):
        copy_task(5, min_len=0)
