"""Model definitions, written as if for one device: distribution is applied from outside (backends/)."""
