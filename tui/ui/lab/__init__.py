"""The lab: experiments on llama-server (sweep, tune, MTP on/off verdict, searches), their controller, views and screens."""
