"""Builders of the modules the GPU tests and the benchmarks load: each module here builds one
group (`build_all(folder) -> {name: path}`, and a LAYOUT of relative paths a GPU machine without
a compiler reads them from); `python -m artifacts DIR` builds them all. Not part of the
installed package."""
