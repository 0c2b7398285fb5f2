"""Builders of the modules the GPU tests and the benchmarks load: each module here builds one
group (`build_all(folder) -> {name: path}`, and a LAYOUT of relative paths a GPU machine without
a compiler reads them from); `python -m tests.support.artifacts OUT` builds them all (`--only
GROUP` one group, `--help` the groups). Test support, not part of the installed package."""
