"""Hostile: never finishes importing (the sandbox's wall clock must kill it)."""

while True:
    pass
