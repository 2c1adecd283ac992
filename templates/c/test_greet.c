/* `make test`: the step's logic, tested natively. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "greet.h"

int main(void) {
    char *ada = greeting("Ada");
    assert(ada && strcmp(ada, "Hello, Ada!") == 0);
    free(ada);
    assert(greeting(" ") == NULL);
    assert(greeting("") == NULL);
    puts("OK");
    return 0;
}
