"""The error a capture raises when the step cannot be replayed."""


class CaptureError(RuntimeError):
    """Raised while ``ndl.compile`` captures a step that a replay could not reproduce.

    ``where`` is the ``file:line`` of the user's code that caused it, when known.
    """

    def __init__(self, message, where=None):
        super().__init__(message)
        self.where = where
