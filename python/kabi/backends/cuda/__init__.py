"""The CUDA C++ backend of kabi reached from Python as ``kabi.cuda``: CUDA source compiled with NVRTC and registered
as a device binary that the core launches (from Python, or from C++ through the same manifest directory).

Importing this package imports neither NVRTC nor a CUDA driver; registering does (NVRTC only: no driver is needed
to compile).
"""

from ._nvrtc import CompiledImage, compile_source, nvrtc_version
from ._registration import SourceKernel, register_source

__all__ = ["CompiledImage", "SourceKernel", "compile_source", "nvrtc_version", "register_source"]
