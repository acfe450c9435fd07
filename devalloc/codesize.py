"""Old path of :mod:`devalloc.tools.codesize` (moved): that module, and a DeprecationWarning."""

from ._moved import alias

alias(__name__)
