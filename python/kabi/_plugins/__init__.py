"""The plugins layer: discovering plugins (``KABI_PLUGIN_PATH``, ``KABI_BINARY_PATH``, entry points), loading
them and device binaries into libkabi, and checking a plugin in a child process. Imports only ``kabi._base`` and
``kabi._core``; what it needs from above (the Triton backend, the ``kabi`` module) the bootstrap hands it."""
