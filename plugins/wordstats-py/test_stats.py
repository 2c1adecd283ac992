import unittest

from stats import word_stats


class WordStatsTest(unittest.TestCase):
    def test_counts_and_ranks(self):
        stats = word_stats("The cat saw the other cat. The end!", top=2)
        self.assertEqual(stats["words"], 8)
        self.assertEqual(stats["unique"], 5)
        self.assertEqual(stats["top"], ["the", "cat"])

    def test_empty(self):
        self.assertEqual(word_stats(""), {"words": 0, "unique": 0, "top": []})


if __name__ == "__main__":
    unittest.main()
