"""The one trial engine: what a trial is (`trial`), how trials rank (`ranking`), how they persist
(`journal`), and how they launch and recover (`launcher`, `failures`, `knob`, `recovery`)."""
