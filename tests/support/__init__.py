"""Test code shared by the suite that is not a fixture."""
