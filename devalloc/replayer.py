"""Old path of :mod:`devalloc.tools.replayer` (moved): that module, and a DeprecationWarning."""

from ._moved import alias

alias(__name__)
