"""lnet testbed."""
