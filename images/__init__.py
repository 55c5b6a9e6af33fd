"""Sandbox image recipes (Dockerfile, offline Debian base script).

Installed as the package data ``sandbox.recipes`` so that ``codeact image build``
works from an installed wheel, not only from a checkout.
"""
