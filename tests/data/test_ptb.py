"""The Penn Treebank loaders on small files in the real format, generated here."""
import numpy as np
import pytest

import needle as ndl
from needle.data import Corpus, Dictionary, batchify, get_batch
from needle.data.datasets import ptb_dataset
from example_scripts import load_example

TRAIN = " aer banknote berlitz \n the cat sat on the mat \n the dog \n"
TEST = " the cat \n a new word \n"


@pytest.fixture
def ptb_folder(tmp_path):
    (tmp_path / "train.txt").write_text(TRAIN)
    (tmp_path / "test.txt").write_text(TEST)
    return tmp_path


def test_corpus_reads_both_splits_with_one_dictionary(ptb_folder):
    corpus = Corpus(ptb_folder)
    words = corpus.dictionary.idx2word
    decoded_train = [words[i] for i in corpus.train]
    assert decoded_train == "aer banknote berlitz <eos> the cat sat on the mat <eos> the dog <eos>".split()
    assert [words[i] for i in corpus.test] == "the cat <eos> a new word <eos>".split()
    assert corpus.dictionary.word2idx["the"] == corpus.train[4] == corpus.test[0]
    assert len(corpus.dictionary) == len(set(TRAIN.split() + TEST.split())) + 1  # + <eos>
    assert all(corpus.dictionary.word2idx[w] == i for i, w in enumerate(words))


def test_max_lines_reads_only_the_first_lines(ptb_folder):
    corpus = Corpus(ptb_folder, max_lines=1)
    assert len(corpus.train) == 4 and len(corpus.test) == 3
    assert Corpus(ptb_folder, max_lines=0).train == []
    with pytest.raises(ValueError, match="max_lines"):
        Corpus(ptb_folder, max_lines=-1)


def test_tokenize_adds_new_words_to_the_dictionary(ptb_folder, tmp_path):
    corpus = Corpus(ptb_folder)
    extra = tmp_path / "extra.txt"
    extra.write_text("the zebra\n")
    before = len(corpus.dictionary)
    ids = corpus.tokenize(str(extra))
    assert ids[0] == corpus.dictionary.word2idx["the"] and ids[1] == before
    assert len(corpus.dictionary) == before + 1


def test_missing_files_name_the_expected_layout(tmp_path):
    (tmp_path / "train.txt").write_text("a b\n")
    with pytest.raises(FileNotFoundError, match=r"test\.txt.*train\.txt and test\.txt"):
        Corpus(tmp_path)


def test_dictionary_is_the_course_one():
    words = Dictionary()
    assert [words.add_word(w) for w in "a b a c b".split()] == [0, 1, 0, 2, 1]
    assert words.idx2word == ["a", "b", "c"] and words.word2idx == {"a": 0, "b": 1, "c": 2}


def test_batchify_lays_contiguous_chunks_in_columns():
    stream = list(range(26))  # 26 = 4 * 6 + 2: the last two are dropped
    batches = batchify(stream, 4, ndl.cpu(), "float32")
    assert isinstance(batches, np.ndarray) and batches.shape == (6, 4) and batches.dtype == np.float32
    np.testing.assert_array_equal(batches[:, 0], np.arange(6))
    np.testing.assert_array_equal(batches[:, 3], np.arange(18, 24))
    with pytest.raises(ValueError, match="batch_size"):
        batchify(stream, 0)
    with pytest.raises(ValueError, match="cannot fill one row"):
        batchify([1, 2], 3)


def test_get_batch_targets_are_the_next_words():
    batches = batchify(list(range(24)), 4)  # (6, 4)
    data, target = get_batch(batches, 1, 3, device=ndl.cpu(), dtype="float32")
    assert data.shape == (3, 4) and target.shape == (12,)
    assert not data.requires_grad and not target.requires_grad
    np.testing.assert_array_equal(data.numpy(), batches[1:4])
    np.testing.assert_array_equal(target.numpy(), batches[2:5].reshape(-1))
    data, target = get_batch(batches, 3, 40)  # near the end: shorter
    assert data.shape == (2, 4) and target.shape == (8,)
    with pytest.raises(ValueError, match=r"i must lie in \[0, len\(batches\) - 1\) = \[0, 5\)"):
        get_batch(batches, 5, 3)


def test_module_layout_is_the_courses():
    assert ptb_dataset.Corpus is Corpus and ndl.data.datasets.batchify is batchify


# ---- the course's language model and helpers (examples/models.py, examples/simple_ml.py) --------
def _example(name):
    return load_example(name)


@pytest.mark.parametrize("seq_model", ["rnn", "lstm"])
def test_language_model_learns_a_repeating_corpus(tmp_path, seq_model):
    (tmp_path / "train.txt").write_text("a b c d e f g\n" * 60)
    (tmp_path / "test.txt").write_text("a b c d e f g\n" * 10)
    corpus = Corpus(tmp_path)
    models, simple_ml = _example("models"), _example("simple_ml")
    np.random.seed(0)
    vocabulary = len(corpus.dictionary)
    model = models.LanguageModel(8, vocabulary, 16, num_layers=2, seq_model=seq_model)
    train = batchify(corpus.train, 8, ndl.cpu(), "float32")
    first_accuracy, first_loss = simple_ml.evaluate_ptb(model, train, seq_len=10)
    accuracy, loss = simple_ml.train_ptb(
        model, train, seq_len=10, n_epochs=8, optimizer=ndl.optim.Adam, lr=0.02, clip=5.0
    )
    test_accuracy, test_loss = simple_ml.evaluate_ptb(model, batchify(corpus.test, 2), seq_len=10)
    assert loss < first_loss / 3, (first_loss, loss)
    assert test_accuracy > 0.9 > first_accuracy, (first_accuracy, test_accuracy)


def test_the_carried_state_is_detached_between_windows(graph_baseline):
    models, simple_ml = _example("models"), _example("simple_ml")
    np.random.seed(0)
    model = models.LanguageModel(4, 5, 6, seq_model="lstm")
    live_nodes_at_each_window = []

    class Recording(ndl.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, h=None):
            if h is not None:
                assert all(state.op is None for state in h), "the carried (h, c) still has a graph"
            live_nodes_at_each_window.append(graph_baseline().live_nodes)
            return self.model(x, h)

    data = batchify(list(np.arange(400) % 5), 4)
    recording = Recording()
    simple_ml.epoch_general_ptb(data, recording, seq_len=5, opt=ndl.optim.SGD(recording.parameters(), lr=0.1))
    assert len(live_nodes_at_each_window) == 20
    assert len(set(live_nodes_at_each_window[1:])) == 1, live_nodes_at_each_window
    assert simple_ml.detach_state(None) is None


def test_language_model_rejects_an_unknown_sequence_model():
    with pytest.raises(ValueError, match="seq_model"):
        _example("models").LanguageModel(4, 5, 6, seq_model="gru")
