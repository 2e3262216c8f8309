"""The diagnosis pipeline as plain Python: evidence types, the four tiers, escalation,
proposers, verification policy and the speed-of-light model. Imports no Django."""
