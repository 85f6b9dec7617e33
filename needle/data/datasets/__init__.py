from .cifar10_dataset import CIFAR10Dataset
