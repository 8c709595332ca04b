"""lnet client."""
