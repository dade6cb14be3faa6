"""Workbook and JSON writers for plan results."""
