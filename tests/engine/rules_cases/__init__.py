"""Before/after kernel modules and helpers for the rules-proposer tests."""
