"""The one error of the checkpoint stage: bad user input, reported as one line that names the fix."""
from __future__ import annotations


class CheckpointInputError(ValueError):
    """A checkpoint, text or head selection that cannot be certified; the message is one line naming the fix."""
