"""The cockpit: the main screen (server panel, settings form, VRAM bars, probes, plan), its controller, views and widgets."""
