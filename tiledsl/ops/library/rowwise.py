"""(being written: see library/__init__.py)"""
