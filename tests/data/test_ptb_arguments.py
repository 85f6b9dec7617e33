"""batchify, get_batch and Corpus refuse bad arguments and files, naming the argument or the file, and change nothing."""
import numpy as np
import pytest

from needle.data import Corpus, batchify, get_batch


@pytest.mark.parametrize(
    "batch_size, error, words",
    [
        pytest.param(2.0, TypeError, r"batchify: batch_size must be an int of at least 1, got float 2.0", id="float"),
        pytest.param("4", TypeError, r"batchify: batch_size must be an int .* got str '4'", id="str"),
        pytest.param(True, TypeError, r"batchify: batch_size .* got bool", id="bool"),
        pytest.param(0, ValueError, r"batchify: batch_size must be at least 1, got batch_size=0", id="zero"),
        pytest.param(-3, ValueError, r"batch_size=-3", id="negative"),
    ],
)
def test_batchify_names_a_bad_batch_size(batch_size, error, words):
    stream = list(range(12))
    with pytest.raises(error, match=words):
        batchify(stream, batch_size)
    assert stream == list(range(12))


@pytest.mark.parametrize(
    "i, bptt, error, words",
    [
        pytest.param(-1, 2, ValueError, r"get_batch: i must lie in \[0, len\(batches\) - 1\) = \[0, 5\) .* got i=-1", id="i-negative"),
        pytest.param(-6, 2, ValueError, r"got i=-6", id="i-far-negative"),
        pytest.param(5, 2, ValueError, r"got i=5 \(iterate with range\(0, len\(batches\) - 1, bptt\)\)", id="i-last-row"),
        pytest.param(99, 2, ValueError, r"got i=99", id="i-past-end"),
        pytest.param(1.0, 2, TypeError, r"get_batch: i must be an int .* got float 1.0", id="i-float"),
        pytest.param(0, 0, ValueError, r"get_batch: bptt must be at least 1, got bptt=0", id="bptt-zero"),
        pytest.param(0, -2, ValueError, r"get_batch: bptt must be at least 1, got bptt=-2", id="bptt-negative"),
        pytest.param(0, 2.5, TypeError, r"get_batch: bptt must be an int of at least 1, got float 2.5", id="bptt-float"),
        pytest.param(0, "35", TypeError, r"get_batch: bptt must be an int .* got str '35'", id="bptt-str"),
    ],
)
def test_get_batch_names_a_bad_row_or_window(i, bptt, error, words):
    batches = batchify(list(range(24)), 4)  # (6, 4)
    before = batches.copy()
    with pytest.raises(error, match=words) as caught:
        get_batch(batches, i, bptt)
    if "bptt must" in words:
        assert "i=" not in str(caught.value)  # the window is blamed, not the row
    np.testing.assert_array_equal(batches, before)


def test_every_row_with_a_target_is_accepted():
    batches = batchify(list(range(24)), 4)  # (6, 4)
    lengths = [get_batch(batches, i, 2)[0].shape[0] for i in range(len(batches) - 1)]
    assert lengths == [2, 2, 2, 2, 1]
    data, target = get_batch(batches, np.int64(4), np.int32(3))
    np.testing.assert_array_equal(data.numpy(), batches[4:5])
    np.testing.assert_array_equal(target.numpy(), batches[5])


@pytest.fixture
def latin1_folder(tmp_path):
    (tmp_path / "train.txt").write_text("the cat\nthe dog\n", encoding="utf-8")
    (tmp_path / "test.txt").write_bytes("a cat\nthe caf\u00e9\n".encode("latin-1"))  # 0xe9 at byte 13
    return tmp_path


def test_corpus_names_the_file_and_byte_that_are_not_utf8(latin1_folder):
    with pytest.raises(ValueError, match=r"Corpus: .*test\.txt is not UTF-8 text at byte offset 13 \(line 2, byte 0xe9\)") as caught:
        Corpus(latin1_folder)
    assert "Corpus reads UTF-8" in str(caught.value) and "iconv" in str(caught.value)
    assert isinstance(caught.value.__cause__, UnicodeDecodeError)


def test_a_failed_tokenize_adds_no_words(latin1_folder, tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    for name in ("train.txt", "test.txt"):
        (good / name).write_text("the cat\n", encoding="utf-8")
    corpus = Corpus(good)
    words_before, index_before = list(corpus.dictionary.idx2word), dict(corpus.dictionary.word2idx)
    (latin1_folder / "more.txt").write_bytes(b"new words here\nand \xff\n")
    with pytest.raises(ValueError, match=r"more\.txt is not UTF-8 text at byte offset 19 \(line 2, byte 0xff\)"):
        corpus.tokenize(latin1_folder / "more.txt")
    assert corpus.dictionary.idx2word == words_before and corpus.dictionary.word2idx == index_before
    assert corpus.dictionary.add_word("new") == len(words_before)  # the next new word gets the next index
