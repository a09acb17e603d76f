"""Data: question sets in every supported format and the passage corpus built from them."""
