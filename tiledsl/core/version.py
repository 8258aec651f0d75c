"""tiledsl's version, where every layer may read it without importing the package's top."""
__version__ = "0.1.0"
