"""attncert: certifying one attention head (Paper A) and Min-IP kernel attention (Paper B)."""
__version__ = "0.1.0"
