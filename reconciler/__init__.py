"""Troupe's reconciler: watches gated pods and nodes, plans whole gangs, and releases them."""
