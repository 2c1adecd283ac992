import unittest

from greet import greeting


class GreetingTest(unittest.TestCase):
    def test_greets_by_name(self):
        self.assertEqual(greeting("Ada"), "Hello, Ada!")

    def test_refuses_an_empty_name(self):
        self.assertIsNone(greeting(" "))


if __name__ == "__main__":
    unittest.main()
