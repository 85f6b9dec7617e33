"""DataLoader's PyTorch options: collate_fn works; worker and pinning options are refused, saying why."""
import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset


def dataset(count=7):
    x = np.arange(count * 2, dtype=np.float32).reshape(count, 2)
    return NDArrayDataset(x, np.arange(count, dtype=np.int64))


def test_collate_fn_gets_the_list_of_samples_and_its_result_is_the_batch():
    seen = []

    def collate(samples):
        seen.append(samples)
        xs = np.stack([x for x, _ in samples]) * 10
        return {"x": ndl.Tensor(xs), "n": len(samples)}

    batches = list(DataLoader(dataset(), batch_size=3, collate_fn=collate))
    assert [batch["n"] for batch in batches] == [3, 3, 1]
    assert [len(samples) for samples in seen] == [3, 3, 1]
    x0, y0 = seen[0][0]  # each sample is dataset[i], as is
    np.testing.assert_array_equal(x0, [0.0, 1.0])
    assert int(y0) == 0
    np.testing.assert_array_equal(batches[1]["x"].numpy(), np.arange(6, 12).reshape(3, 2) * 10)


def test_collate_fn_follows_shuffle_and_drop_last():
    np.random.seed(3)
    order = np.random.permutation(7)
    np.random.seed(3)
    loader = DataLoader(dataset(), batch_size=3, shuffle=True, drop_last=True,
                        collate_fn=lambda samples: [int(y) for _, y in samples])
    assert list(loader) == [order[:3].tolist(), order[3:6].tolist()]
    assert len(loader) == 2


def test_collate_fn_must_be_callable():
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        DataLoader(dataset(), collate_fn="stack")


def test_pytorch_defaults_are_accepted():
    loader = DataLoader(dataset(), batch_size=4, num_workers=0, pin_memory=False, persistent_workers=False)
    assert [x.shape for x, _ in loader] == [(4, 2), (3, 2)]


@pytest.mark.parametrize(
    "options, words",
    [
        ({"num_workers": 4}, ["num_workers=4", "main process", "already in memory", "num_workers=0"]),
        ({"pin_memory": True}, ["pin_memory=True", "once", "pin_memory=False"]),
        ({"persistent_workers": True}, ["persistent_workers=True", "no worker processes"]),
        ({"num_workers": -1}, ["non-negative int", "num_workers=-1"]),
    ],
)
def test_worker_options_are_refused_with_the_reason(options, words):
    with pytest.raises(ValueError) as info:
        DataLoader(dataset(), **options)
    for word in words:
        assert word in str(info.value)
