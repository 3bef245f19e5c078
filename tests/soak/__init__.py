"""The chaos soak (``make soak``) and its checker."""
