"""Hostile: its import never ends (a blocking wait, as a download or input() would be)."""

import time

time.sleep(3600)
