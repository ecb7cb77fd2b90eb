"""The variants picker: every quant of an hf-repo planned side by side from the headers, its controller, views and screen."""
