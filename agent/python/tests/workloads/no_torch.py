"""A Python program that never imports torch: the probe must stay silent."""

import os

print("chained", os.environ.get("GPUMEM_TEST_CHAINED"))
