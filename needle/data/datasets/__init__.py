from .ptb_dataset import Corpus, Dictionary, batchify, get_batch
