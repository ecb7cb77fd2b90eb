"""The main screen's controllers: plain classes that own the work and its state, and post messages.

plan     settings -> validation -> the instant estimate and llama.cpp's exact figures
calibration  after a model's first exact result, its estimate calibrated on llama.cpp's dry runs (a worker)
server   launch, restart, stop, the reconciliation, and the stop that quitting waits for
probes   one probe run at a time on the backend's probe thread
tuning   a sweep, MTP on vs off, a search: one at a time, running behind any screen

They never touch a widget: the `MainScreen` calls them and hands what they return (or the state a
message brought) down to its widgets ("attributes down, messages up").
"""
