"""Driving one experiment through the lifecycle: the driver, its state handlers, the watch loop, its Redis journal."""
