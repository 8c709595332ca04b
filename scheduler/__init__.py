"""lnet scheduler."""
