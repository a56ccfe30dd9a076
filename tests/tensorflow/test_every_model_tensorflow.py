"""Every TensorFlow model of the catalog (each workloads/<model>/tensorflow.py) passes the checks all models share
(tests/model_checks.py's generated_tests: it learns on a fixed batch, steps in each math mode, takes the analyses
after a bench run's window, has the smoke preset's parameter count, its file holds only model code), with the per-model data of that
module's tables; what is specific to one model is in tests/tensorflow/test_<model>_tensorflow.py."""

from model_checks import generated_tests

globals().update(generated_tests("tensorflow"))
