"""Penn Treebank text for language models, with the course's names: Dictionary, Corpus, batchify, get_batch.

The files are plain text, one sentence a line, words separated by spaces; every line ends with
the token ``<eos>``. The expected layout is ``base_dir/train.txt`` and ``base_dir/test.txt``
(the ``ptb.train.txt`` and ``ptb.test.txt`` of the usual distribution, renamed as the course does).
"""
import numbers
import os
from typing import Dict, List, Optional, Tuple

import numpy

from ...autograd import Tensor

END_OF_SENTENCE = "<eos>"


class Dictionary:
    """Words to consecutive indices and back: ``word2idx`` (a dict) and ``idx2word`` (a list).

    Example:
        >>> words = Dictionary()
        >>> words.add_word("the"), words.add_word("cat"), words.add_word("the")
        (0, 1, 0)
        >>> words.idx2word, len(words)
        (['the', 'cat'], 2)
    """

    def __init__(self):
        self.word2idx: Dict[str, int] = {}
        self.idx2word: List[str] = []

    def add_word(self, word: str) -> int:
        """The index of ``word``, giving it the next free one if it is new."""
        index = self.word2idx.get(word)
        if index is None:
            index = len(self.idx2word)
            self.word2idx[word] = index
            self.idx2word.append(word)
        return index

    def __len__(self) -> int:
        return len(self.idx2word)

    def _forget_after(self, count: int) -> None:
        """Drop every word added after the first ``count`` (undoes a failed read)."""
        for word in self.idx2word[count:]:
            del self.word2idx[word]
        del self.idx2word[count:]


class Corpus:
    """The train and test splits of a Penn Treebank folder as lists of word indices, one Dictionary for both.

    Args:
        base_dir: the folder holding ``train.txt`` and ``test.txt``.
        max_lines: read at most this many lines of each file (None: all).

    Raises:
        FileNotFoundError naming the expected layout when a file is missing; ValueError naming
        the file, the byte offset and the expected encoding (UTF-8) when a file is not UTF-8.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "train.txt").write_text("the cat sat\\nthe dog\\n")
        >>> _ = (folder / "test.txt").write_text("a cat\\n")
        >>> corpus = Corpus(folder)
        >>> corpus.train, corpus.test, len(corpus.dictionary)
        ([0, 1, 2, 3, 0, 4, 3], [5, 1, 3], 6)
    """

    def __init__(self, base_dir, max_lines: Optional[int] = None):
        self.dictionary = Dictionary()
        paths = [os.path.join(base_dir, name) for name in ("train.txt", "test.txt")]
        missing = [path for path in paths if not os.path.isfile(path)]
        if missing:
            raise FileNotFoundError(
                f"Penn Treebank files not found: {', '.join(missing)}. Corpus expects the folder "
                f"{base_dir!s} to hold train.txt and test.txt (ptb.train.txt and ptb.test.txt renamed), "
                "one sentence a line; it cannot be downloaded here, so copy the files in"
            )
        self.train = self.tokenize(paths[0], max_lines)
        self.test = self.tokenize(paths[1], max_lines)

    def tokenize(self, path, max_lines: Optional[int] = None) -> List[int]:
        """The indices of the words of the first ``max_lines`` lines of ``path``, ``<eos>`` after each line.

        New words are added to ``self.dictionary``.
        """
        if max_lines is not None and max_lines < 0:
            raise ValueError(f"max_lines must be None or >= 0, got max_lines={max_lines}")
        ids: List[int] = []
        add_word = self.dictionary.add_word
        known_words = len(self.dictionary)
        try:
            with open(path, encoding="utf-8") as lines:
                for count, line in enumerate(lines):
                    if max_lines is not None and count >= max_lines:
                        break
                    ids.extend(add_word(word) for word in line.split())
                    ids.append(add_word(END_OF_SENTENCE))
        except UnicodeDecodeError as error:
            self.dictionary._forget_after(known_words)  # a failed read adds no words
            raise ValueError(_not_utf8_message(path, error)) from error
        return ids


def _not_utf8_message(path, error: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 lies in ``path`` (the file is read again, only on this error)."""
    with open(path, "rb") as stream:
        data = stream.read()
    try:
        data.decode("utf-8")
        offset = None
    except UnicodeDecodeError as whole_file:
        offset = whole_file.start
    where = ""
    if offset is not None:
        line = data.count(b"\n", 0, offset) + 1
        where = f" at byte offset {offset} (line {line}, byte 0x{data[offset]:02x})"
    return (
        f"Corpus: {path} is not UTF-8 text{where}: {error.reason}. Corpus reads UTF-8 "
        "(plain ASCII is UTF-8 too); convert the file first, e.g. iconv -f latin1 -t utf-8 old.txt > train.txt"
    )


def batchify(data, batch_size: int, device=None, dtype=None) -> numpy.ndarray:
    """Cut a stream of word indices into ``batch_size`` columns: a numpy array (nbatch, batch_size).

    Column j is the j-th contiguous chunk of the stream; the tail that does not fill a row is
    dropped; ``batch_size`` must be an int of at least 1. ``device`` is accepted for the course's signature (the result is a numpy array);
    ``dtype`` is its element type (default float32, as the course's tensors).

    Example:
        >>> batchify(list(range(10)), 3).tolist()
        [[0.0, 3.0, 6.0], [1.0, 4.0, 7.0], [2.0, 5.0, 8.0]]
    """
    batch_size = _positive_int(batch_size, "batch_size", "batchify")
    nbatch = len(data) // batch_size
    if nbatch == 0:
        raise ValueError(f"batchify: {len(data)} tokens cannot fill one row of batch_size={batch_size}")
    stream = numpy.asarray(data[: nbatch * batch_size], dtype=dtype or "float32")
    return numpy.ascontiguousarray(stream.reshape(batch_size, nbatch).T)


def get_batch(batches, i: int, bptt: int, device=None, dtype=None) -> Tuple[Tensor, Tensor]:
    """Rows ``i`` to ``i + bptt`` of ``batchify``'s array and the words that follow each.

    Raises:
        TypeError or ValueError naming ``i`` (an int in ``[0, len(batches) - 1)``) or ``bptt``
        (an int of at least 1); nothing is read then.

    Returns:
        ``(data, target)``: data a Tensor (seq_len, batch_size) and target the next words, a
        Tensor (seq_len * batch_size,), where seq_len = min(bptt, len(batches) - 1 - i).

    Example:
        >>> data, target = get_batch(batchify(list(range(10)), 3), 0, 2)
        >>> data.numpy().tolist(), target.numpy().tolist()
        ([[0.0, 3.0, 6.0], [1.0, 4.0, 7.0]], [1.0, 4.0, 7.0, 2.0, 5.0, 8.0])
    """
    bptt = _positive_int(bptt, "bptt", "get_batch")
    if isinstance(i, bool) or not isinstance(i, numbers.Integral):
        raise TypeError(f"get_batch: i must be an int (a row of batchify's array), got {type(i).__name__} {i!r}")
    rows = len(batches)
    if not 0 <= i < rows - 1:
        raise ValueError(
            f"get_batch: i must lie in [0, len(batches) - 1) = [0, {rows - 1}) so that a target row follows it, "
            f"got i={i} (iterate with range(0, len(batches) - 1, bptt))"
        )
    seq_len = min(bptt, rows - 1 - int(i))
    data = batches[i : i + seq_len]
    target = batches[i + 1 : i + 1 + seq_len].reshape(-1)
    return (
        Tensor(data, device=device, dtype=dtype, requires_grad=False),
        Tensor(target, device=device, dtype=dtype, requires_grad=False),
    )


def _positive_int(value, name, function):
    """``value`` as an int of at least 1, or an error naming ``function``'s argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{function}: {name} must be an int of at least 1, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{function}: {name} must be at least 1, got {name}={value}")
    return int(value)
