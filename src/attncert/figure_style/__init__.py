"""The one figure style of every stage (`style`): readers' names and colours of the methods, sizes, fonts,
legends and the paper's marks. At the bottom of the import graph: it imports no other attncert package."""
