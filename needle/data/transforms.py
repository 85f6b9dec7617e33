"""Data augmentation transforms on single H x W x C numpy images (course semantics).

Random draws use numpy's global generator exactly as the course does, so a run
seeded with ``np.random.seed`` reproduces the course's values.
"""

import numpy as np


class Transform:
    """Base class: a callable mapping one H x W x C image to another."""

    def __call__(self, img):
        raise NotImplementedError(f"{type(self).__name__} must define __call__(self, img)")


class RandomFlipHorizontal(Transform):
    """Mirror the image left-right with probability ``p``.

    Args:
        p: probability of flipping, in [0, 1].

    Example:
        >>> img = np.arange(6).reshape(1, 3, 2)
        >>> RandomFlipHorizontal(p=1.0)(img)[0, :, 0]
        array([4, 2, 0])
    """

    def __init__(self, p=0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomFlipHorizontal p must be in [0, 1]; got p={p}")
        self.p = p

    def __call__(self, img):
        flip = np.random.rand() < self.p
        if flip:
            return img[:, ::-1, :]
        return img


class RandomCrop(Transform):
    """Zero-pad H and W by ``padding``, then crop an H x W window at a random shift.

    The shift ``(shift_x, shift_y)`` is drawn uniformly from
    ``[-padding, padding]``; the window starts at row ``padding + shift_x`` and
    column ``padding + shift_y`` of the padded image.

    Args:
        padding: non-negative number of zero pixels added on each side.

    Example:
        >>> img = np.ones((2, 2, 1))
        >>> RandomCrop(padding=0)(img).shape
        (2, 2, 1)
    """

    def __init__(self, padding=3):
        if int(padding) != padding or padding < 0:
            raise ValueError(f"RandomCrop padding must be a non-negative int; got padding={padding}")
        self.padding = int(padding)

    def __call__(self, img):
        pad = self.padding
        shift_x, shift_y = np.random.randint(low=-pad, high=pad + 1, size=2)
        height, width = img.shape[0], img.shape[1]
        padded = np.pad(img, ((pad, pad), (pad, pad), (0, 0)))
        top, left = pad + shift_x, pad + shift_y
        return padded[top : top + height, left : left + width, :]
