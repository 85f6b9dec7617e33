"""Penn Treebank text for language models, with the course's names: Dictionary, Corpus, batchify, get_batch.

The files are plain text, one sentence a line, words separated by spaces; every line ends with
the token ``<eos>``. The expected layout is ``base_dir/train.txt`` and ``base_dir/test.txt``
(the ``ptb.train.txt`` and ``ptb.test.txt`` of the usual distribution, renamed as the course does).
"""
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


class Corpus:
    """The train and test splits of a Penn Treebank folder as lists of word indices, one Dictionary for both.

    Args:
        base_dir: the folder holding ``train.txt`` and ``test.txt``.
        max_lines: read at most this many lines of each file (None: all).

    Raises:
        FileNotFoundError naming the expected layout when a file is missing.

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
        with open(path, encoding="utf-8") as lines:
            for count, line in enumerate(lines):
                if max_lines is not None and count >= max_lines:
                    break
                ids.extend(add_word(word) for word in line.split())
                ids.append(add_word(END_OF_SENTENCE))
        return ids


def batchify(data, batch_size: int, device=None, dtype=None) -> numpy.ndarray:
    """Cut a stream of word indices into ``batch_size`` columns: a numpy array (nbatch, batch_size).

    Column j is the j-th contiguous chunk of the stream; the tail that does not fill a row is
    dropped. ``device`` is accepted for the course's signature (the result is a numpy array);
    ``dtype`` is its element type (default float32, as the course's tensors).

    Example:
        >>> batchify(list(range(10)), 3).tolist()
        [[0.0, 3.0, 6.0], [1.0, 4.0, 7.0], [2.0, 5.0, 8.0]]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got batch_size={batch_size}")
    nbatch = len(data) // batch_size
    if nbatch == 0:
        raise ValueError(f"batchify: {len(data)} tokens cannot fill one row of batch_size={batch_size}")
    stream = numpy.asarray(data[: nbatch * batch_size], dtype=dtype or "float32")
    return numpy.ascontiguousarray(stream.reshape(batch_size, nbatch).T)


def get_batch(batches, i: int, bptt: int, device=None, dtype=None) -> Tuple[Tensor, Tensor]:
    """Rows ``i`` to ``i + bptt`` of ``batchify``'s array and the words that follow each.

    Returns:
        ``(data, target)``: data a Tensor (seq_len, batch_size) and target the next words, a
        Tensor (seq_len * batch_size,), where seq_len = min(bptt, len(batches) - 1 - i).

    Example:
        >>> data, target = get_batch(batchify(list(range(10)), 3), 0, 2)
        >>> data.numpy().tolist(), target.numpy().tolist()
        ([[0.0, 3.0, 6.0], [1.0, 4.0, 7.0]], [1.0, 4.0, 7.0, 2.0, 5.0, 8.0])
    """
    seq_len = min(bptt, len(batches) - 1 - i)
    if seq_len < 1:
        raise ValueError(f"get_batch: no target follows row i={i} of {len(batches)} rows (use i < {len(batches) - 1})")
    data = batches[i : i + seq_len]
    target = batches[i + 1 : i + 1 + seq_len].reshape(-1)
    return (
        Tensor(data, device=device, dtype=dtype, requires_grad=False),
        Tensor(target, device=device, dtype=dtype, requires_grad=False),
    )
