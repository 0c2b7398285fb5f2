"""What the tests share that is not a fixture: where things are and which tools are here
(environment), the float64 references (references), how GPU tests find their modules
(gpu_modules), the builders of those modules (artifacts/), and helpers and test bodies that
tests of several modules use. Fixtures live in the conftest.py files; no test module imports
another."""
