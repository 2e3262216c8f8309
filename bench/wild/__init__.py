"""bench/wild: a corpus of other projects' Triton kernels, built at benchmark time.

Pinned wheels of Triton kernel libraries are downloaded into an ignored cache, their sources are
read straight out of the zips, and each chosen kernel with its library launch code (and the
module-level definitions they use) is written into an upload-format module under an ignored
build folder. Nothing of the libraries' code is kept in the repository. `build.py` is the command.
"""
