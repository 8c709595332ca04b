"""lnet depot."""
