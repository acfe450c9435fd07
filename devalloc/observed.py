"""Old path of :mod:`devalloc.host.observed` (moved): that module, and a DeprecationWarning."""

from ._moved import alias

alias(__name__)
