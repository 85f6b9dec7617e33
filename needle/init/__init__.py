"""Tensor initialisation: constants, random draws (course-exact) and weight initialisers."""
from .init_basic import constant, one_hot, ones, ones_like, rand, randb, randn, zeros, zeros_like
from .init_initializers import kaiming_normal, kaiming_uniform, xavier_normal, xavier_uniform
