from setuptools import setup

# All metadata lives in setup.cfg; this file lets older tooling run `setup.py develop`.
setup()
