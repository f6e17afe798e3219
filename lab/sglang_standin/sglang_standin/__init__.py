"""SGLang stand-in for the lab (a test double, never used in production). See README.md."""
__version__ = "0.5.11.post0+standin"
