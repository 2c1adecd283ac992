/* The step's logic, free of weft, so a plain C compiler can test it. */
#ifndef GREET_H
#define GREET_H

/* The greeting for `name` (from malloc), or NULL when there is no name. */
char *greeting(const char *name);

#endif
