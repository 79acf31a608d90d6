"""p4/p4ctl."""
