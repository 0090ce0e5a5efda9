"""The public face: one port, the gates every request passes, and the stream back."""
