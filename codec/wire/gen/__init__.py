"""The code generators: the fast codec's Python source, written from the walker's model of the declarations."""
